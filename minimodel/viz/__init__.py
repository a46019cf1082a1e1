"""Plots and ipywidgets used by the chapters (matplotlib and ipywidgets are imported lazily)."""
