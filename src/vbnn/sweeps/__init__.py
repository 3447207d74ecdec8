"""Sweeps: independent units of work run by an executor (this process, worker processes, or a
Ray cluster), with the driver the only writer of what they produce (``contracts``,
``executors``, ``driver``, ``tuning_driver``, ``grid``, ``uci``, ``command``)."""
