"""The wiring: the command line, the settings and the parts each command runs with.

``entry`` (the console script) runs ``statusline`` alone and every other
command through ``commands`` (flags, parser, dispatch, exit codes), which
hands each to its module: ``report_command``, ``serve_command``,
``backfill_command``; what they share is ``pipeline``. ``config`` reads the
settings once and ``assemble`` turns them into each stage's options.
"""
