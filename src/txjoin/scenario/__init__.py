"""Consistency scenarios (``txjoin scenario``): a workload on real databases,
txjoin and a naive per-event join side by side, every version checked."""
