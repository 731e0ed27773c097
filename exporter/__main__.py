"""``python -m exporter``: the same as the ``claude-code-exporter`` command."""

from exporter.cli import main
from exporter.entry import finish

if __name__ == "__main__":  # importing the module (e.g. pkgutil.walk_packages) runs nothing
    finish(main())  # the command's exit code, without the interpreter's teardown
