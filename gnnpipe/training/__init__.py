"""Models and how they are trained and applied: loops, engines, DDP, inference, predict."""
