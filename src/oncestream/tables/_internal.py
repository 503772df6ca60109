"""The internal face of ``oncestream.tables``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.tables``); see docs/architecture.md.
"""

from ._iceberg_catalog import EMBEDDED_FILE, CatalogSpec, catalog_spec

__all__ = ["EMBEDDED_FILE", "CatalogSpec", "catalog_spec"]
