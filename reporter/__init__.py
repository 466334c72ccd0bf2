"""Chat channels, outbox, Alertmanager relay and the daily digest."""
