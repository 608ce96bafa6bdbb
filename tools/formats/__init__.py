"""What several data commands write or read: click records, gettext
catalogs."""
