"""Where the rate table (:class:`exporter.projections.pricing.RateTable`) comes from, in parts.

``model_ids`` normalises model ids, ``rates`` holds the value types,
``genai_table`` builds the table from the genai-prices database (once, cached
on disk), ``rules`` applies our own rules and the user's overrides on top.
"""
