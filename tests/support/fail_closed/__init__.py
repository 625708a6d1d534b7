"""The fail-closed suite's support: its checks of what became of deliveries, a Redis proxy that fails
on cue, a stalled worker."""
