"""Real-workload bottleneck scenarios: PyTorch jobs that `traintop diagnose` must explain."""
