"""Serving: record a trail (admission, signing, band keys) and recall one (candidates by band
keys, matching and the look-alike guard, validation on read, the answer)."""
