"""Probes that find circuits in checkpoints (installed as `mechsynth.probes`); one file per probe."""
