"""The wiring: the command line, the settings and the parts each command runs with."""
