-- Give a (staging) table its final name, in the same schema.
ALTER TABLE {table} RENAME TO {name}
