"""`from pipeline.publish.load import load_table`, the path that dataset cards published before pipeline/tables/
name: load_table itself is pipeline/tables/load.py's."""
from pipeline.tables.load import load_table  # noqa: F401
