"""Campaigns, blinded randomized assignment, the sealed allocation log."""
