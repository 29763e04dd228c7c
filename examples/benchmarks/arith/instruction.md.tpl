Answer with a single number.

{{question}}
