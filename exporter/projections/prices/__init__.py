"""The price table behind :mod:`exporter.projections.pricing`, in small parts.

``ids`` normalises model ids, ``rates`` holds the value types, ``genai`` builds
the table from the genai-prices database (once, cached on disk), ``rules``
applies our own rules and the user's overrides on top.
"""
