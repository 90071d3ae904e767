"""sacbench: CleanRL SAC benchmark, reproducible, resumable and measured."""

__version__ = "0.1.0"
