"""What the learner's code may call, run in the learner's process: each chapter's `prepare` (validation and the
output), its launch-configuration functions and the given helpers (the chapter facade's GIVEN names them), and the
validation they share (validation.py). Nothing here knows an exercise's answer."""
