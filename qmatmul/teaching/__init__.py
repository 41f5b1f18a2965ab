"""What the chapters teach with: the roofline model (roofline_model.py), plots, widgets, and the figures recorded on
the H200 (recorded.py reads bench-h200.json). Nothing here decides a grade."""
