"""What a run is judged by and shown as: metrics, evaluation, report, figures."""
