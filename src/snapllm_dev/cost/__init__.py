"""What a workload costs per month on Lambda and on always-on options, and where they break even."""
