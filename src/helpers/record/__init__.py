"""What the course records: :mod:`~helpers.record.ledger` (JSON records, one file per chapter),
:mod:`~helpers.record.ledger_names` (the one table of record names) and
:mod:`~helpers.record.reported` (the case studies' published figures)."""
