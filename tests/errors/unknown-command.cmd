2 compiel tests/errors/ok.ft
