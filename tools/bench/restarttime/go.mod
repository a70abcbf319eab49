module warren/tools/bench/restarttime

go 1.20

require github.com/rabbitmq/amqp091-go v1.16.0

require github.com/Azure/go-amqp v1.4.0
