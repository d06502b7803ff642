"""A one-process stand-in for Horovod (tests only: Horovod 0.28.1 does not build against TF 2.21)."""
