"""How a request proves who it is: passwords, session cookies, CSRF, API
tokens, login throttling, and the access checks routes use."""
