"""Hydra's plugin discovery imports `hydra_plugins.*`: topl's validating sweeper lives here."""
