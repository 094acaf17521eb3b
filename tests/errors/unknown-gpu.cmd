2 compile tests/errors/ok.ft --gpu a100
