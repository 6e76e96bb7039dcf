"""Advice: what to change (donation, allocator settings, device capacity)."""
