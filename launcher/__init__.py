"""topl launcher: Hydra configs -> typed job spec -> contract -> verl invocation -> launch."""

__version__ = "0.1.0"
