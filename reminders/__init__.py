"""Scheduled WeCom messages for a Django CRM, sent once per occurrence."""
