"""Launch backends: local (reference engines), subprocess (verl here), ray_job (Ray Job API)."""
