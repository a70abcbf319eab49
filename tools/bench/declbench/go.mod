module warren/tools/bench/declbench

go 1.20

require github.com/rabbitmq/amqp091-go v1.16.0

require github.com/Azure/go-amqp v1.4.0
