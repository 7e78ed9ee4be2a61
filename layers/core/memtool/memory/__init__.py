"""Memory records, the versioned DynamoDB store, TTL and credit policy, PII scrubbing."""
