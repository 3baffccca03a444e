"""The domain: events, commands and deciders. Pure: no I/O, no clock, no randomness."""
