"""Accounts and roles: users, sign-in, API tokens, the admin's user pages."""
