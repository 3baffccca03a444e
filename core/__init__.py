"""The domain: the shared language (events, commands, the world's shape in ``world/``) and one room per capability
with its deciders. Imports nothing outside ``core/``. Pure: no I/O, no clock, no randomness."""
