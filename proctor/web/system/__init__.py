"""The station's own endpoints: health, API documentation."""
