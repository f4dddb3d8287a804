"""What the course records: the results ledger, the names of its records, the case studies' figures.

- :mod:`~helpers.record.ledger` -- JSON records of measurements, one file per chapter and mode
- :mod:`~helpers.record.ledger_names` -- the one table of record names each chapter may write
- :mod:`~helpers.record.reported` -- the case studies' published figures
"""
