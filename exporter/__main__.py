"""``python -m exporter``: the same as the ``claude-code-exporter`` command (exporter.cli.entry)."""

from exporter.cli.entry import main

if __name__ == "__main__":  # importing the module (e.g. pkgutil.walk_packages) runs nothing
    main()
