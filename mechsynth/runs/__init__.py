"""Runs on disk: the run directory (`rundir`), reading a run (`run`), a run's whole config (`runconfig`), and
atomic writes and safe loads (`io`)."""
