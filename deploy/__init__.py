"""Running the app as several processes behind a reverse proxy (see deploy/README.md)."""
