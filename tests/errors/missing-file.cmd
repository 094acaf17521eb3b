1 compile tests/errors/no-such-file.ft
