"""pytest-encperf: measure what disk encryption costs, as a pytest run."""

__version__ = "0.1.0"
