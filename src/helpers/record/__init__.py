"""What the course records: the results ledger, the one table of its record names, and the case
studies' published figures."""
