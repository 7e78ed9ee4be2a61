"""The memory lifecycle: what MaintenanceFlow does to stored memories (docs/maintenance.md).

One module per step (decay, consolidate, conflicts, capacity, pii_rescan); each receives the
record store port and walks one tenant's partitions with a cursor, a bounded batch per call.
"""
