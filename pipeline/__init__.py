"""hardpos: compositional hard-negative / hard-positive caption data on Apache Beam."""
import logging


def _drop_beam_gcp_import_warning(record: logging.LogRecord) -> bool:
    # Without the optional gcp extra, importing apache_beam logs "apitools not found" on every start;
    # it concerns BigQuery clients this project never uses, and it would bury our one-line errors.
    return not record.getMessage().startswith("apitools not found")


logging.getLogger().addFilter(_drop_beam_gcp_import_warning)
