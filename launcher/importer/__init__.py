"""`topl recipes import`: a verl bash launch script read as data (lexing, expansion, resolution) and turned into a recipe with a report by line."""
