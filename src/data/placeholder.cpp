// Replaced by the corpus builder.
