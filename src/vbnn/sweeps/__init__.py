"""Sweeps: independent units of work run by an executor (this process, or a Ray cluster), with
the driver the only writer of what they produce (``executors``, ``grid``, ``command``)."""
