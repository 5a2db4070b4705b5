package transport

// MetadataOrderingKey is the metadata key that names a message's ordering
// key. Messages that share a key (an order, an account, an aggregate) are
// handled one at a time and in publish order by a consumer group — across
// every instance of it, not only inside one process — while messages of
// different keys, and messages without a key, run in parallel as before.
//
// A message keeps the key in its metadata, so its handler sees it. An
// empty value is no key. The SQL transports (PostgreSQL, SQLite, SQL
// Server) and mem:// honour it; see docs/ordering.md for what it
// guarantees, what it costs and how it meets retries, dead letters,
// delays, consumer groups and batching.
const MetadataOrderingKey = "berth_ordering_key"
