"""What every layer uses: atomic file writing and the record format."""
