"""Small helpers every layer may use: figures, progress bars, the headless browser."""
