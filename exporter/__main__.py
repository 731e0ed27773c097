"""``python -m exporter``: the same as the ``claude-code-exporter`` command."""

from exporter.cli import main
from exporter.entry import run

if __name__ == "__main__":  # importing the module (e.g. pkgutil.walk_packages) runs nothing
    run(main)  # as the process's whole job (exporter.entry.run)
