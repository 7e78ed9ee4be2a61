"""Request/response models, identity from the authorizer, and error -> HTTP mapping."""
