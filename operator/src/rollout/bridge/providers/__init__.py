"""The bridge's providers: where a trial's sandbox runs (`base` says what each one does)."""
