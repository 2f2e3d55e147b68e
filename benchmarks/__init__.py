"""Speed measurements that print ratios (`python -m benchmarks.NAME`)."""
