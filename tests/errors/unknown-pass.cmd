2 compile tests/errors/ok.ft --dump-after remats
